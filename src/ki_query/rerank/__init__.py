"""The offline reranker: a small learned ranking over the evidence the query path already has.

The spec's reranker asks a chat gateway (network, an LLM) and the embedded default has none,
so the default install never reranked. This one needs neither: it scores each of the first
candidates by a linear model over the legs' ranks and scores, the evidence of the candidate's
section or document, the law prior, the document status and the citations of the best hits
(features.py), trained pairwise on generated and handwritten queries over laws that are never evaluated
(model.py, bench/train_reranker.py). It reorders a prefix and never drops a candidate.
"""
