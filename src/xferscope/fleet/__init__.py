"""`xferscope fleet`: many GPUs and nodes at once under MPI."""
