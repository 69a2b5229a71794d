"""`xferscope overlap`: how much of a copy hides under CPU work, rotating buffers, or kernels."""
