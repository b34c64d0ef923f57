"""Python client for fulcrumd's worker socket (standard library only, Python >= 3.8).

Training::

    client = Client("/run/fulcrum/worker.sock", role="train", workload="resnet18", batch=32,
                    on_profile=run_real_batch)   # without it: declines profile batches
    for x, y in loader:
        with client.train_step():
            loss = model(x, y); loss.backward(); opt.step()

Inference::

    client = Client(path, role="infer", workload="yolo", batch=8, batch_sizes=[1, 2, 4, 8],
                    on_profile=run_real_batch)
    server = InferenceServer(client, handler=lambda payloads: model(payloads))
    server.start()
    future = server.submit(image)      # from any thread
    result = future.result()

A request fulcrumd refuses (its stream asks for more than its share of the GPU beside
other inference streams) fails with RateLimited; the server carries on with the others.

When fulcrumd restarts the client reconnects and registers again: a trainer waits for it
(or trains without turns: train_while_away=True), an InferenceServer serves what is queued
itself meanwhile. See docs/runtime.md, and docs/protocol.md for the wire protocol.
"""

from .client import (
    PROTOCOL_VERSION,
    Client,
    FulcrumError,
    Grant,
    InferenceServer,
    MicroStep,
    RateLimited,
)

__all__ = ["PROTOCOL_VERSION", "Client", "FulcrumError", "Grant", "InferenceServer", "MicroStep", "RateLimited"]
__version__ = "0.1.0"
