"""SD3.5 DiffusionNFT with a PickScore reward on Ray: ``python -m recipes.diffusion_nft --help``."""
