"""Configuration: oci.conf, pyscrun.conf, %-patterns, where they live."""
