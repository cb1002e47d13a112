"""The built-in backbones, one package each (vit, swin, hiera: timm models whose attention `ablate.nn.surgery`
replaces; mil: the Syn paper's pooling network): a torch-free declaration registered with `register_backbone` in
its `__init__`, the network in its `layers`."""
