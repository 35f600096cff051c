"""AIOps agent for AI/GPU training clusters."""

__version__ = "0.1.0"
