"""tiledmm's benchmark: ``python -m tiledmm.bench`` times tiledmm and torch.matmul side by side."""
