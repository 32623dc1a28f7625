"""A WGAN-GP training loop as igul222/improved_wgan_training's ``gan_toy.py``
is written for PyTorch (caogang/wgan-gp): an MLP generator and critic on
eight Gaussians, three critic steps per generator step, each with the
gradient penalty on images interpolated between real and generated
(``autograd.grad(..., create_graph=True)`` on ``interpolates`` made with
``requires_grad_()``), 5 iterations on the CPU, no ``vramscope.step()``.

    python -m vramscope run -o wgan.pickle wgan_gp.py [zero_grad] [item]

As written, each critic cost is kept as a tensor (``disc_costs.append(
D_cost)``, where the original logs ``D_cost.cpu().data.numpy()``): its
autograd graph keeps that step's ``interpolates`` and the gradient the
penalty's backward gave it. ``netG.zero_grad()`` at the generator's step
keeps the generator's gradients through the next critic steps, where the
run peaks (the penalty's double backward).

The fixes `leaks` gives, each on its own: ``zero_grad``,
``optimizerG.zero_grad(set_to_none=True)`` right after ``optimizerG.step()``;
``item``, ``disc_costs.append(D_cost.item())``. The recordings are
``tests/fixtures/recorded/wgan_gp.pickle.gz`` (as written),
``wgan_gp_zero_grad.pickle.gz`` and ``wgan_gp_item.pickle.gz``.
"""
import math
import sys

import torch
import torch.autograd as autograd
import torch.nn as nn
import torch.optim as optim

torch.manual_seed(1)
DIM, LAMBDA, CRITIC_ITERS, BATCH_SIZE, ITERS = 256, 0.1, 3, 128, 5
ZERO_GRAD, ITEM = "zero_grad" in sys.argv[1:], "item" in sys.argv[1:]


def mlp(inputs, outputs):
    return nn.Sequential(
        nn.Linear(inputs, DIM), nn.ReLU(True),
        nn.Linear(DIM, DIM), nn.ReLU(True),
        nn.Linear(DIM, DIM), nn.ReLU(True),
        nn.Linear(DIM, outputs),
    )


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = mlp(2, 2)

    def forward(self, noise):
        return self.main(noise)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = mlp(2, 1)

    def forward(self, inputs):
        return self.main(inputs).view(-1)


CENTERS = torch.tensor([(math.cos(k * math.pi / 4), math.sin(k * math.pi / 4)) for k in range(8)]) * 2


def batch_of_gaussians():
    which = torch.randint(0, 8, (BATCH_SIZE,))
    return (CENTERS[which] + torch.randn(BATCH_SIZE, 2) * 0.02) / 1.414


def calc_gradient_penalty(netD, real_data, fake_data):
    alpha = torch.rand(BATCH_SIZE, 1).expand(real_data.size())
    interpolates = alpha * real_data + ((1 - alpha) * fake_data)
    interpolates.requires_grad_(True)
    disc_interpolates = netD(interpolates)
    gradients = autograd.grad(outputs=disc_interpolates, inputs=interpolates,
                              grad_outputs=torch.ones(disc_interpolates.size()),
                              create_graph=True, retain_graph=True, only_inputs=True)[0]
    return ((gradients.norm(2, dim=1) - 1) ** 2).mean() * LAMBDA


netG, netD = Generator(), Discriminator()
optimizerD = optim.Adam(netD.parameters(), lr=1e-4, betas=(0.5, 0.9))
optimizerG = optim.Adam(netG.parameters(), lr=1e-4, betas=(0.5, 0.9))
one = torch.tensor(1.0)
mone = one * -1
disc_costs = []
for iteration in range(ITERS):
    for p in netD.parameters():
        p.requires_grad = True
    for iter_d in range(CRITIC_ITERS):
        real_data = batch_of_gaussians()
        netD.zero_grad()
        D_real = netD(real_data).mean()
        D_real.backward(mone)
        with torch.no_grad():
            fake = netG(torch.randn(BATCH_SIZE, 2))
        D_fake = netD(fake).mean()
        D_fake.backward(one)
        gradient_penalty = calc_gradient_penalty(netD, real_data, fake)
        gradient_penalty.backward()
        D_cost = D_fake - D_real + gradient_penalty
        Wasserstein_D = D_real - D_fake
        optimizerD.step()
    for p in netD.parameters():
        p.requires_grad = False
    netG.zero_grad()
    fake = netG(torch.randn(BATCH_SIZE, 2))
    G = netD(fake).mean()
    G.backward(mone)
    G_cost = -G
    optimizerG.step()
    if ZERO_GRAD:
        optimizerG.zero_grad(set_to_none=True)
    if not ITEM:
        disc_costs.append(D_cost)
    else:
        disc_costs.append(D_cost.item())
