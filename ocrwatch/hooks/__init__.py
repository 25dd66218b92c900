"""What runs for each finished file: ``runner`` starts the user's ``on_done`` programs with
their time limit and ends their whole process tree, ``queue`` keeps the hooks still to run
on disk so a crash loses none (``core.hookshell`` keeps file names
out of a hook's code), and ``notify`` sends the desktop notifications. The runner follows
the daemon's event stream (:mod:`ocrwatch.core.events`, ``AfterDone.listen``).
"""
