"""Federation (spec/federation.md): statutes, contracts and guidelines searched beside the firm's index.

    search.py            FederatedSearch: the one call behind `ki ask` (and the surfaces), typed hits
    retriever.py         FederatedRetriever: selection, per-corpus queries, anchors, Verweise, quota
    ranking.py           rank, fusion, corpus quota, named-corpus-first (plain hit dicts)
    providers.py         the shipped providers: law-mention router, anchor register, statute Verweise
    registry.py          the corpus registry (SQL) plus the firm's index, comparability of embedders
    corpus_retriever.py  one statute-format corpus: hybrid query, lookups by address, negative check
    corpus_units.py      a corpus's units read from SQL (hits, addresses, neighbours)
    corpus_loader.py     statute-format records into SQL rows and their own index
    evaluation.py        nDCG@10 / Recall@10 / Recall@100 of a corpus retriever
    errors.py            edge exceptions, light to import (the CLI's error table names them)
"""
