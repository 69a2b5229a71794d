"""Moving pageable memory fast: the staged copier's Python API and `xferscope pageable`."""
