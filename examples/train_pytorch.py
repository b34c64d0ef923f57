"""A PyTorch training loop under fulcrumd (not run in CI: needs torch and a GPU).

Each minibatch runs inside `client.train_step()`: it waits for fulcrumd's grant, runs,
and releases with the measured time, so inference requests are never stuck behind
training kernels. fulcrumd may also ask for a profile batch (to time this workload at a
new power mode): `on_profile` runs one synthetic minibatch of the requested size.

    PYTHONPATH=clients/python python3 examples/train_pytorch.py --socket /run/fulcrum/worker.sock
"""

import argparse

import torch
import torchvision
from fulcrum_client import Client


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", default="/run/fulcrum/worker.sock")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=1000)
    args = ap.parse_args()

    dev = torch.device("cuda")
    model = torchvision.models.resnet18(num_classes=10).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    data = torchvision.datasets.FakeData(size=args.batch * args.steps, image_size=(3, 224, 224), num_classes=10,
                                         transform=torchvision.transforms.ToTensor())
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch, num_workers=4, pin_memory=True)

    client = Client(args.socket, role="train", workload="resnet18", batch=args.batch)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        # The turn ends when the GPU is done, not when the kernels are queued.
        torch.cuda.synchronize()
        return loss

    def on_profile(batch_size):
        x = torch.randn(batch_size, 3, 224, 224, device=dev)
        y = torch.randint(0, 10, (batch_size,), device=dev)
        step(x, y)

    client.on_profile = on_profile
    for i, (x, y) in enumerate(loader):
        # Copy the inputs before taking the turn: host work does not need the GPU turn.
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        with client.train_step(samples=len(x)):
            loss = step(x, y)
        if i % 50 == 0:
            print("step", i, "loss", float(loss))
    client.close()


if __name__ == "__main__":
    main()
