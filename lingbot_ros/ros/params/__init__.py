"""The node's parameters: the one table (``table``), their declaration and checks (``declare``),
the typed settings they build (``node_config``) and the image topic's name and type
(``topics``)."""
