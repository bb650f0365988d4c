"""Corpora, evaluation and the demo: public statute corpora, ki eval, ki demo."""
