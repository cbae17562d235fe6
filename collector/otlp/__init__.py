"""OTLP protobuf helpers shared by the stages: values and attributes (values.py), the wire format of
export requests (wire.py)."""
