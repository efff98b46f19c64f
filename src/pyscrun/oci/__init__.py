"""OCI data: the bundle's config.json, the state document, the features document."""
