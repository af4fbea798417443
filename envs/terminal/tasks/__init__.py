"""Data: the shipped terminal tasks, one YAML file each (a package so the files ship with it)."""
