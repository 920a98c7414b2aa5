"""The algorithm: MAPPO's networks, the on-device rollout, GAE, value normalization, the PPO update,
the imitation warm start, and `learner.train_iteration` that strings them together. Nothing here
reads or writes files, logs, or starts processes (that is `agents.run`)."""
