"""Data synthesis: verified QA pairs and <environment, tools, task, verifier> tuples."""
