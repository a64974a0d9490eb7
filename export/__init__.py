"""costlab.export"""
