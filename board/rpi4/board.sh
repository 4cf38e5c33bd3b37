# Raspberry Pi 4 Model B (BCM2711, Cortex-A72, 1 to 8 GiB; this preset budgets 2 GiB).
# Boot chain: the SoC's EEPROM bootloader reads the EFI system partition (FAT, first GPT
# partition): config.txt, start4.elf and fixup4.dat (raspi-firmware), the board's device
# tree, and U-Boot (u-boot-rpi) as the "kernel"; U-Boot starts GRUB (EFI/BOOT/BOOTAA64.EFI)
# exactly as on qemu-virt, and GRUB boots slot A or B. Not booted in CI: described whole so
# that `tools/image.sh --board rpi4` builds a flashable card once raspi-firmware can be
# fetched (it is in Debian's non-free-firmware component; see README.md).

BOARD_NAME=rpi4
BOARD_RAM_CLASS_MIB=2048
# The mini UART on GPIO 14/15 is ttyS1 once the device tree is the board's. panic=5 and gpt
# as on qemu-virt (board/qemu-virt/board.sh says why).
BOARD_CMDLINE="console=ttyS1,115200 console=tty1 panic=5 quiet loglevel=4 gpt"
# SD card (sdhci-iproc, mmc_block), Ethernet (bcmgenet with its PHY), file systems, the
# SoC's watchdog and random number generator.
BOARD_MODULES="mmc_block sdhci-iproc broadcom genet squashfs crc32c_generic ext4 vfat nls_cp437 nls_ascii bcm2835_wdt iproc-rng200"
# The device tree U-Boot hands to the kernel (from the kernel package).
BOARD_DTBS="broadcom/bcm2711-rpi-4-b.dtb"
# Extra packages the ESP needs, pinned in tools/image/debs.lock.
BOARD_DEBS="u-boot-rpi raspi-firmware"
# Cards and SSDs are 8 GiB and more: the data partition in the image is small, and init
# grows it to the disk's end on first boot.
BOARD_ESP_MIB=64
BOARD_SLOT_MIB=48
BOARD_DATA_MIB=512
BOARD_NET_IF=eth0

# Called by images/build.sh with the ESP's folder and the unpacked packages.
board_esp() {
    local esp=$1 deb=$2
    cp "$deb"/usr/lib/raspi-firmware/{start4.elf,fixup4.dat} "$esp/"
    cp "$deb"/usr/lib/linux-image-*/broadcom/bcm2711-rpi-4-b.dtb "$esp/"
    cp "$deb/usr/lib/u-boot/rpi_arm64/u-boot.bin" "$esp/u-boot.bin"
    cp "$(dirname "${BASH_SOURCE[0]}")/config.txt" "$esp/config.txt"
}
