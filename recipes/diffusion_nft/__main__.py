from recipes.diffusion_nft.pipeline import main

main()
