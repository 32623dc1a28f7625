"""pytorch/examples' DCGAN training loop (``dcgan/main.py``), its models at
32x32 and a batch of 32 random images, 4 iterations on the CPU: two
models, two Adam optimizers, the discriminator's step (real, then the
generator's images as ``fake.detach()``), then the generator's.

    python -m vramscope run -o gan.pickle gan_dcgan.py [fixed]

``fixed``: each optimizer's gradients freed right after its own step
(``optimizerD.zero_grad(set_to_none=True)`` after ``optimizerD.step()``, the
same for the generator) and none made for the discriminator in the
generator's step (``netD.requires_grad_(False)`` around it), as `leaks`
advises. The recordings are ``tests/fixtures/recorded/gan_dcgan.pickle.gz``
and ``gan_dcgan_fixed.pickle.gz``.
"""
import sys

import torch
import torch.nn as nn
import torch.optim as optim

torch.manual_seed(0)
nz, ngf, ndf, nc, batch = 100, 32, 32, 3, 32


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), nn.Tanh(),
        )

    def forward(self, x):
        return self.main(x)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 4), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 4, 1, 4, 1, 0, bias=False), nn.Sigmoid(),
        )

    def forward(self, x):
        return self.main(x).view(-1, 1).squeeze(1)


netG, netD = Generator(), Discriminator()
criterion = nn.BCELoss()
optimizerD = optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optimizerG = optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
FIXED = sys.argv[1:] == ["fixed"]
G_losses, D_losses = [], []
for i in range(4):
    real = torch.rand(batch, nc, 32, 32) * 2 - 1
    # (1) the discriminator: log(D(x)) + log(1 - D(G(z)))
    netD.zero_grad()
    label = torch.full((batch,), 1.0)
    output = netD(real)
    errD_real = criterion(output, label)
    errD_real.backward()
    noise = torch.randn(batch, nz, 1, 1)
    fake = netG(noise)
    label.fill_(0.0)
    output = netD(fake.detach())
    errD_fake = criterion(output, label)
    errD_fake.backward()
    errD = errD_real + errD_fake
    optimizerD.step()
    if FIXED:
        optimizerD.zero_grad(set_to_none=True)
        netD.requires_grad_(False)
    # (2) the generator: log(D(G(z)))
    netG.zero_grad()
    label.fill_(1.0)
    output = netD(fake)
    errG = criterion(output, label)
    errG.backward()
    optimizerG.step()
    if FIXED:
        optimizerG.zero_grad(set_to_none=True)
        netD.requires_grad_(True)
    G_losses.append(errG.item())
    D_losses.append(errD.item())
