"""pyscrun: an OCI runtime that runs containers as Slurm jobs."""

__version__ = "0.1.0"
OCI_VERSION = "1.0.2"
