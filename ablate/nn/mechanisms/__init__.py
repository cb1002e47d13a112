"""The built-in attention mechanisms, one package each (softmax, csan, syn, kernel, nlm, sparse): a torch-free
declaration registered with `register_mechanism` in its `__init__`, its token mixer in its `layers`."""
