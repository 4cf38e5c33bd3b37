# The reference board: QEMU's `virt` machine (Cortex-A53, 512 MiB), booted by U-Boot's
# qemu_arm64 build, which starts GRUB from the EFI system partition. CI boots it.
# Sourced by images/build.sh; every path is relative to this folder.

BOARD_NAME=qemu-virt
# The RAM class KeepPeek budgets against (its ceilings scale with it; see config preset).
BOARD_RAM_CLASS_MIB=512
# The kernel's command line (GRUB adds the slot: kp.slot=a|b). panic=5: a kernel panic
# reboots, and a slot on trial that panics is not booted again. gpt: a primary partition
# table torn by a power cut while the data partition grew is read from its backup (Linux
# looks at the backup only when told), and init writes the primary again.
BOARD_CMDLINE="console=ttyAMA0 panic=5 quiet loglevel=4 gpt"
# Kernel modules the initramfs loads, in this order, with their dependencies first
# (resolved from the kernel's modules.dep, by file name): disk, network, file systems,
# watchdog, entropy.
BOARD_MODULES="virtio_pci virtio_blk virtio_net virtio-rng squashfs crc32c_generic ext4 vfat nls_cp437 nls_ascii i6300esb"
# Device trees the slot carries (none: QEMU hands its own to U-Boot).
BOARD_DTBS=""
# Packages beyond the kernel, busybox and GRUB (none: QEMU brings U-Boot as its -bios).
BOARD_DEBS=""
# Partition layout (GPT, MiB): the EFI system partition, two root slots, the data partition.
# The data partition in the image is small; init grows it to the disk's end on first boot
# (the image test boots it from a 2 GiB disk). Partition names are what Linux finds them by.
BOARD_ESP_MIB=32
BOARD_SLOT_MIB=48
BOARD_DATA_MIB=320
# The network interface init brings up with DHCP.
BOARD_NET_IF=eth0
