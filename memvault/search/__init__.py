"""Finding memories: text, the lexical index, embedders and vectors, topics, rerankers, snippets."""
