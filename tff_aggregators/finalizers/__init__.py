"""Finalizers (`tff.learning.templates.FinalizerProcess`): server rules that
need the global model."""
