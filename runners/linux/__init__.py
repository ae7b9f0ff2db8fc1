"""Linux support shared by the Linux runners (landlock, bwrap, docker): not a runner itself."""
