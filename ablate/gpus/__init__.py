"""The GPU check `ablate gpu-check` runs (`check`): what this machine's driver lists and whether torch can use it
(`host`), the check's sweep and its dry run (`sweep`), each phase launched and what it measured (`figures`), and how
busy each GPU was while its trials trained (`busy`, NVML). A client of `ablate.api.launch`, reached through
`ablate.api.gpu_check`."""
