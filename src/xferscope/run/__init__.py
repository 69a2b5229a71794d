"""`xferscope run`: the investigation, its records, diagnosis, metrics, history and compare."""
