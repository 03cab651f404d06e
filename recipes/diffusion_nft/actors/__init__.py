"""The Ray actors of the pipeline: plain classes, which ``placement.py`` wraps with ``ray.remote``.

engine.RolloutEngine    diffusers SD3 with the trainer's synced LoRA weights; samples as the job's
                        algorithm does (``Algorithm.sample``)
reward.RewardActor      PickScore (or JPEG compressibility)
manager.RolloutManager  drives the engines and the reward; the algorithm's advantages and train data
trainer.TrainActor      one FSDP2 rank (a plain module at world size 1): LoRA on the SD3 transformer,
                        the optimizer-step loop around the algorithm's loss, AdamW, grad scaler

Every actor gets the one ``JobConfig``; a method that depends on the algorithm loads the job's
algorithm module where it calls it (``recipes.diffusion_nft.algorithms`` says why).
"""
