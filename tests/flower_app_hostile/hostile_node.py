"""The ClientApp of the hostile deployment test.

On a SuperNode started with ``--node-config hostile=1`` it answers every train message with
a crafted reply: a ``torch.save`` archive (the format hetfl's messages use) of an object whose
unpickling creates the file named by the run config's ``marker``, so a server that loads the
reply with plain pickle runs the node's code. On any other SuperNode it is hetfl's ClientApp.
"""
from __future__ import annotations

import io

import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from hetfl_core.runtime.flower_app import client as hetfl_client

client = ClientApp()


class CreatesMarker:
    """Unpickled, this object is ``open(path, "w")``: it creates the file at ``path``."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


def crafted_archive(marker: str) -> bytes:
    """A ``torch.save`` archive whose loading with plain pickle creates ``marker``."""
    buffer = io.BytesIO()
    torch.save(CreatesMarker(marker), buffer)
    return buffer.getvalue()


@client.train()
def train(msg: Message, context: Context) -> Message:
    """The crafted reply on a hostile SuperNode, hetfl's client update on any other."""
    if not int(context.node_config.get("hostile", 0)):
        return hetfl_client(msg, context)
    payload = crafted_archive(str(context.run_config["marker"]))
    reply = ConfigRecord({"report": payload, "state": payload})
    return Message(RecordDict({"hetfl": reply}), reply_to=msg)
