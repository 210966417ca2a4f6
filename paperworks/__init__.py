"""paperworks: ten recent ML methods reproduced as declarative DVC + Prefect pipelines."""

__version__ = "0.1.0"
