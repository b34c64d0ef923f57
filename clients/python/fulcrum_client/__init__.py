"""Python client for fulcrumd's worker socket (standard library only, Python >= 3.8).

Training::

    client = Client("/run/fulcrum/worker.sock", role="train", workload="resnet18", batch=32)
    for x, y in loader:
        with client.train_step():
            loss = model(x, y); loss.backward(); opt.step()

Inference::

    client = Client(path, role="infer", workload="yolo", batch=8, batch_sizes=[1, 2, 4, 8])
    server = InferenceServer(client, handler=lambda payloads: model(payloads))
    server.start()
    future = server.submit(image)      # from any thread
    result = future.result()

See docs/protocol.md for the wire protocol.
"""

from .client import (
    PROTOCOL_VERSION,
    Client,
    FulcrumError,
    Grant,
    InferenceServer,
)

__all__ = ["PROTOCOL_VERSION", "Client", "FulcrumError", "Grant", "InferenceServer"]
__version__ = "0.1.0"
