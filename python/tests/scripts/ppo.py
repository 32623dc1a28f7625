"""Reinforcement learning: PPO on a toy environment, as CleanRL's ``ppo.py``
structures it. Rollouts under ``no_grad`` into preallocated buffers, the
advantages (GAE), then epochs of minibatch updates of an actor-critic
(two MLPs, Adam, gradient clipping), ``optimizer.zero_grad()`` between the
forward and ``backward()`` as CleanRL calls it; 2 updates of 2 epochs of 4
minibatches on the CPU.

    python -m vramscope run -o ppo.pickle ppo.py [fixed]

``fixed``: ``zero_grad()`` before the minibatch's forward instead. The
recording without it is ``tests/fixtures/recorded/ppo_zero_grad_late.pickle.gz``.
"""
import sys

import torch
from torch import nn

torch.manual_seed(0)
OBS, ACT, ENVS, STEPS = 64, 6, 8, 64
MINIBATCH = 128
FIXED = sys.argv[1:] == ["fixed"]


class Env:
    def __init__(self):
        self.state = torch.randn(ENVS, OBS)

    def step(self, action):
        self.state = self.state * 0.9 + torch.randn(ENVS, OBS) * 0.1
        reward = (action == 0).float()
        done = torch.rand(ENVS) < 0.01
        return self.state.clone(), reward, done


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(OBS, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 1))
        self.actor = nn.Sequential(nn.Linear(OBS, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, ACT))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        logits = self.actor(x)
        probs = torch.distributions.Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


env = Env()
agent = Agent()
opt = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
obs = torch.zeros(STEPS, ENVS, OBS)
actions = torch.zeros(STEPS, ENVS, dtype=torch.long)
logprobs = torch.zeros(STEPS, ENVS)
rewards = torch.zeros(STEPS, ENVS)
dones = torch.zeros(STEPS, ENVS)
values = torch.zeros(STEPS, ENVS)
episode_returns = []

next_obs, next_done = env.state.clone(), torch.zeros(ENVS)
for update in range(2):
    for step in range(STEPS):
        obs[step], dones[step] = next_obs, next_done
        with torch.no_grad():
            action, logprob, _, value = agent.get_action_and_value(next_obs)
            values[step] = value.flatten()
        actions[step], logprobs[step] = action, logprob
        next_obs, reward, next_done = env.step(action)
        rewards[step] = reward
        next_done = next_done.float()
    episode_returns.append(rewards.sum(0).mean().item())
    with torch.no_grad():
        next_value = agent.get_value(next_obs).reshape(1, -1)
        advantages = torch.zeros_like(rewards)
        lastgaelam = 0
        for t in reversed(range(STEPS)):
            nextnonterminal = 1.0 - (next_done if t == STEPS - 1 else dones[t + 1])
            nextvalues = next_value if t == STEPS - 1 else values[t + 1]
            delta = rewards[t] + 0.99 * nextvalues * nextnonterminal - values[t]
            advantages[t] = lastgaelam = delta + 0.99 * 0.95 * nextnonterminal * lastgaelam
        returns = advantages + values
    b_obs, b_logprobs, b_actions = obs.reshape(-1, OBS), logprobs.reshape(-1), actions.reshape(-1)
    b_adv, b_ret, b_val = advantages.reshape(-1), returns.reshape(-1), values.reshape(-1)
    inds = torch.arange(STEPS * ENVS)
    for epoch in range(2):
        perm = inds[torch.randperm(len(inds))]
        for start in range(0, len(inds), MINIBATCH):
            mb = perm[start:start + MINIBATCH]
            if FIXED:
                opt.zero_grad()
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb], b_actions[mb])
            ratio = (newlogprob - b_logprobs[mb]).exp()
            adv = b_adv[mb]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(0.8, 1.2)).mean()
            v_loss = 0.5 * ((newvalue.view(-1) - b_ret[mb]) ** 2).mean()
            loss = pg_loss - 0.01 * entropy.mean() + 0.5 * v_loss
            if not FIXED:
                opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            opt.step()
    print(f"update {update}: return {episode_returns[-1]:.2f}")
