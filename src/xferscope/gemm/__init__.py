"""`xferscope gemm`: seed 003's GEMM study through cuBLASLt in today's precisions. shapes.py
reads the shapes (sizes, ranges, presets, files) and their alignment classes; measure.py times
and verifies each GEMM, and holds the result record, its JSON and CSV forms and its findings."""
