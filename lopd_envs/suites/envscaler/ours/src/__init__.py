"""The sources of lopd's own EnvScaler environment classes. ``build.py`` embeds them as ``env_class_code`` in
the official-format metadata; at run time they are executed only from that metadata, inside the sandbox."""
