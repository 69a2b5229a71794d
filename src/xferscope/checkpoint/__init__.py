"""`xferscope checkpoint`: a checkpoint's path from its files to a GPU, stage by stage."""
