"""costlab.featurizers"""
