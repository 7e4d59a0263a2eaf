"""Finding memories: text, the lexical index, embedders and vectors, creation order, rerankers, snippets."""
