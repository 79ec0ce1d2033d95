"""The scaler's tests import the fake API server by this name; it is the one in fakekube.py."""

from fakekube import FakeKube

__all__ = ["FakeKube"]
