"""costlab.train"""
