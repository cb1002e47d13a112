"""Networks. `mechanisms/` holds one package per built-in attention mechanism and `backbones/` one per built-in
backbone (each a registered component: a torch-free declaration in its `__init__`, its torch code in its `layers`).
The modules here are what they share: the token-mixer interface (`mixer`), backbone surgery on timm models
(`surgery`), shape rules (`shapes`), model building (`build`, `factory`), param/FLOP accounting (`accounting`,
`costs`, `widths`) and attention diagnostics (`diagnostics`).

Nothing is imported here, so validating and planning (which import the declarations) never import torch.
"""
