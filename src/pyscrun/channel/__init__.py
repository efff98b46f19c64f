"""The channel between an anchor and its node agents, across machines.

TCP, because the agents run on compute nodes that share nothing with the login host
but the network; binary frames (`frames`), so a container's stdio travels as streams
beside the control messages; and a challenge-response on the container's secret
(`auth`) at the start of every connection, so only the container's own agents get in.
"""
