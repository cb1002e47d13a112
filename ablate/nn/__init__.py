"""Networks: the token-mixer interface (`mixer`), one package per mechanism and per backbone (each a registered
component: a torch-free declaration in its `__init__`, its torch code in its `layers`), backbone surgery on timm
models, model building, param/FLOP accounting and attention diagnostics.

Nothing is imported here, so validating and planning (which import the declarations) never import torch.
"""
