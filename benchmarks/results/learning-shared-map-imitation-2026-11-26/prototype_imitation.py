"""Prototype of the imitation warm start, measured before agents/imitation.py existed: behaviour cloning
of the coordinated planner, then DAgger rounds, each evaluated on 128 validation maps (seed 777, not
the protocol's). Run from the repository root:
    python prototype_imitation.py HIDDEN DEMO_STEPS EPOCHS ROUNDS ROUND_STEPS ROUND_EPOCHS
(128 1280 20 2 640 10: the results' DAgger lines; 256 1280 20 0 0 0: the 256-unit clone)."""
import sys, time, torch
torch.set_num_threads(1)
hidden, steps, epochs, rounds, dsteps, depochs = (int(x) for x in sys.argv[1:7])
from agents.config import load_config, Amp
from agents.networks import make_actor
from agents.rollout import agent_ids, policy_step
from agents.action_noise import ActionNoise
from agents.evaluate import run_episodes, actor_policy, paired_difference
from agents.setup import make_autocast
from uavsim.env import UAVSwarmEnv
from uavsim.coordinated import CoordinatedFrontierPolicy
cpu = torch.device("cpu")
cfg = load_config("configs/shared_map.yaml", ["env.num_envs=64", f"model.hidden_size={hidden}"])
ac = make_autocast(Amp.bf16, cpu)
actor = make_actor(cfg.env_config(), cfg.model, torch.Generator().manual_seed(0))
n = cfg.env.num_uavs
data = {"L": [], "S": [], "H": [], "A": []}
def gather(env, pol, steps, student):
    obs = env.reset() if not hasattr(env, "_started") else env._last
    agent = agent_ids(env.num_envs, n, cpu); noise = ActionNoise(11, env.env_index, n)
    for i in range(steps):
        a = pol(env)
        with ac():
            data["H"].append(actor.headings(obs["state"]).view(-1, 3))
        data["L"].append(obs["local"].reshape(-1, obs["local"].shape[-1])); data["S"].append(obs["state"][:, :actor.map_dim]); data["A"].append(a.view(-1))
        act = a if not student else policy_step(actor, obs, agent, noise, ac, deterministic=(student == "argmax"))[0]
        obs, *_ = env.step(act)
def train(epochs):
    L = torch.cat(data["L"]); S = torch.cat(data["S"]); H = torch.cat(data["H"]); A = torch.cat(data["A"])
    F = S.shape[0]; opt = torch.optim.Adam(actor.parameters(), lr=1e-3); mb = 512; ag = agent_ids(mb, n, cpu)
    t0 = time.time()
    for ep in range(epochs):
        perm = torch.randperm(F); tot = acc = 0.0; k = 0
        for j in range(0, F - mb + 1, mb):
            fr = perm[j:j + mb]; rows = (fr[:, None] * n + torch.arange(n)).view(-1)
            with ac():
                logits = actor(L[rows], ag, S[fr], state_repeat=n, heading=H[rows]).float()
            loss = torch.nn.functional.cross_entropy(logits, A[rows])
            opt.zero_grad(); loss.backward(); opt.step()
            tot += loss.item(); acc += (logits.argmax(-1) == A[rows]).float().mean().item(); k += 1
    print(f"  frames {F} last epoch loss {tot/k:.3f} acc {acc/k:.3f} {time.time()-t0:.0f}s", flush=True)
def evaluate(tag):
    res = {}
    for name in ("coordinated", "sampled", "argmax"):
        e = UAVSwarmEnv(cfg.env_config(), num_envs=128, device=cpu, seed=777)
        if name == "coordinated":
            p = CoordinatedFrontierPolicy(e); act = lambda o: p(e)
        else:
            act = actor_policy(actor, e, name == "argmax", 777, ac)
        res[name], _ = run_episodes(e, act)
    for name in ("sampled", "argmax"):
        d = paired_difference(res[name], res["coordinated"])
        print(f"{tag} {name}: {res[name]['steps_to_target'].mean():.1f} vs coord {d['mean_steps_diff']:+.1f} ± {d['stderr']:.1f} (faster {d['faster']}, slower {d['slower']})", flush=True)
t0 = time.time()
env = UAVSwarmEnv(cfg.env_config(), num_envs=64, device=cpu, seed=5, obs_dtype=torch.bfloat16)
gather(env, CoordinatedFrontierPolicy(env, seed=1), steps, None)
train(epochs); evaluate(f"BC h{hidden}")
for r in range(rounds):
    env = UAVSwarmEnv(cfg.env_config(), num_envs=64, device=cpu, seed=100 + r, obs_dtype=torch.bfloat16)
    gather(env, CoordinatedFrontierPolicy(env, seed=2 + r), dsteps, "sampled")
    train(depochs); evaluate(f"DAgger{r+1} h{hidden}")
print(f"total {time.time()-t0:.0f}s")
