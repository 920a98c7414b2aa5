"""Seed 000: a GRPO-shaped prompt-enhancement loop, policy -> diffusion -> CLIP reward, overlapped.

The policy LM rewrites each prompt (``generate()``, ``group`` samples a prompt), a diffusion
pipeline draws each rewrite and CLIP scores the image against the original prompt; the three run
at once on their own devices (``StagePipeline``), then one policy-gradient step with group-relative
advantages (``stream_train``, one prompt's group at a time). Tiny random-weight models stand in for
Qwen-VL, SD3 and CLIP: a real job loads them with ``from_pretrained`` instead of ``toy.``.

Run from the repository root: ``python examples/seed000_grpo_loop.py`` (GPUs when present).
"""

import torch
import toy_models as toy  # tiny random-weight models (examples/toy_models.py)

from agents.placement import Stage, StagePipeline, model_bytes, place_models, stream_train

PROMPTS = ["a photo of a cat", "a house by the river", "a red car in the city", "a dog in the snow"]


def group_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """GRPO's advantage: each sample's reward against its prompt's group. rewards: [prompts, group]."""
    return (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-6)


def main(prompts=PROMPTS, group=4, iterations=2, new_tokens=6, steps=2):
    tok = toy.tiny_tokenizer(padding_side="left")
    policy, sd, clip = toy.tiny_policy_lm(vocab_size=len(tok)), toy.tiny_sd_pipeline(), toy.tiny_clip()
    clip_inputs = toy.tiny_clip_processor()
    toy.visible_gpus()  # place_models takes the host where there is none: say so
    # the policy trains: its weights, their gradients and AdamW's two moments (4x the weights); the others infer
    where = place_models({"policy": 4 * model_bytes(policy), "sd": model_bytes(sd), "clip": model_bytes(clip)})
    policy.to(where["policy"])
    sd.to(where["sd"])
    clip.to(where["clip"])
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)

    @torch.no_grad()
    def rewrite(prompt):  # cuda:0 in seed 000
        ids = tok([prompt], return_tensors="pt").to(where["policy"])
        seqs = policy.generate(**ids, do_sample=True, max_new_tokens=new_tokens, num_return_sequences=group)
        n = ids.input_ids.shape[1]
        eos = seqs[:, n:] == tok.eos_token_id
        gen = torch.cat([torch.zeros_like(seqs[:, :n], dtype=torch.bool), eos.cumsum(1) - eos.int() == 0], 1)
        return {"prompt": prompt, "seqs": seqs, "gen": gen, "texts": tok.batch_decode(seqs, skip_special_tokens=True)}

    @torch.no_grad()
    def draw(item):  # cuda:1
        images = sd(item["texts"], num_inference_steps=steps, height=32, width=32, guidance_scale=1.0).images
        return {**item, "images": images}

    @torch.no_grad()
    def reward(item):  # cuda:2: CLIP similarity of each image to the original prompt
        x = clip_inputs(text=[item["prompt"]], images=item["images"], return_tensors="pt", padding=True)
        out = clip(**x.to(where["clip"]))
        return {**item, "rewards": torch.cosine_similarity(out.image_embeds, out.text_embeds)}

    def loss_fn(batch):  # REINFORCE with group-relative advantages on the generated tokens
        logits = policy(batch["seqs"], attention_mask=torch.ones_like(batch["seqs"])).logits[:, :-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, batch["seqs"][:, 1:, None]).squeeze(-1)
        mask = batch["gen"][:, 1:].float()
        return -(batch["adv"][:, None] * logp * mask).sum() / mask.sum()

    history = []
    for it in range(iterations):
        stages = [Stage(rewrite, where["policy"]), Stage(draw, where["sd"]), Stage(reward, where["clip"])]
        rolled = StagePipeline(stages).run(prompts)  # prompt i+1 is rewritten while prompt i is drawn
        rewards = torch.stack([r["rewards"].cpu() for r in rolled])  # [prompts, group]
        batches = [{"seqs": r["seqs"], "gen": r["gen"], "adv": a} for r, a in zip(rolled, group_advantages(rewards))]
        stats = stream_train(loss_fn, batches, opt, device=where["policy"], accumulate=len(batches))  # one step
        history.append(
            {"reward": rewards.mean().item(), "loss": sum(stats.losses) / len(batches), "steps": stats.steps}
        )
        print(f"iteration {it}: mean reward {history[-1]['reward']:.4f}, policy loss {history[-1]['loss']:.4f}")
        print("  e.g.", repr(prompts[0]), "->", repr(rolled[0]["texts"][0]))
    return history


if __name__ == "__main__":
    from command_line import run  # examples/command_line.py: --help and the sizes as options

    run(main, __doc__)
