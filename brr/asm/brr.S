/* branch-on-random for GNU as and clang's integrated assembler.
 *
 *     brr FREQ, LABEL
 *
 * jumps to LABEL with probability (1/2)^(FREQ+1), FREQ in 0..15.
 * Encoding (see brr/README.md): REX(0100 0 R 0 0) 0F B9 ModRM(00 reg 101) rel32,
 * i.e. `ud1 reg32, [rip + rel32]` with the frequency in REX.R:reg and the
 * branch target as the RIP-relative effective address. Real CPUs raise #UD
 * (SIGILL); the brr emulator and the SIGILL handler execute it.
 * AT&T and Intel syntax both accept the macro, since it only emits data.
 */
.macro brr freq:req, target:req
	.if (\freq) < 0 || (\freq) > 15
	.error "brr: frequency must be in 0..15"
	.endif
	.byte 0x40 | (((\freq) >> 3) << 2), 0x0f, 0xb9, (((\freq) & 7) << 3) | 5
	.long (\target) - . - 4
.endm
