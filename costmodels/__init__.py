"""costlab.costmodels"""
