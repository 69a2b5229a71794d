"""`xferscope trace`: an unmodified program's copies, recorded through CUPTI, summarized and
priced."""
