"""costlab.train: the Lightning DataModule and LightningModule, training / fine-tuning / evaluation entry
points and their reports."""
