"""Evaluations of a trained model (HellaSwag, ...); each module imports torch only when called."""
