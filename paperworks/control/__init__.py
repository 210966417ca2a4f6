"""Interpretable control (paper 10): TD3 teacher → noisy oracle rollouts → decision tree."""
