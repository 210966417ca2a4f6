"""Insurance track: listwise-trained small cross-encoders vs an instructed zero-shot reranker (paper 03)."""
