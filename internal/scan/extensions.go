package scan

import (
	"path"
	"strings"
	"unicode"
)

// sesBlocked is every file extension Amazon SES refuses as an attachment,
// from the SES Developer Guide, "Amazon SES unsupported attachment types"
// (https://docs.aws.amazon.com/ses/latest/dg/mime-types.html).
var sesBlocked = map[string]bool{}

func init() {
	for _, e := range strings.Fields(`
		.ade .adp .app .asp .bas .bat .cer .chm .cmd .com .cpl .crt .csh .der
		.exe .fxp .gadget .hlp .hta .inf .ins .isp .its .js .jse .ksh .lib .lnk
		.mad .maf .mag .mam .maq .mar .mas .mat .mau .mav .maw .mda .mdb .mde
		.mdt .mdw .mdz .msc .msh .msh1 .msh2 .mshxml .msh1xml .msh2xml .msi .msp
		.mst .ops .pcd .pif .plg .prf .prg .reg .scf .scr .sct .shb .shs .sys
		.ps1 .ps1xml .ps2 .ps2xml .psc1 .psc2 .tmp .url .vb .vbe .vbs .vps
		.vsmacros .vss .vst .vsw .vxd .ws .wsc .wsf .wsh .xnk`) {
		sesBlocked[e] = true
	}
}

// BlockedExtension reports whether filename has an extension Amazon SES
// refuses. The check is case-insensitive and sees through the usual
// disguises: trailing dots and spaces ("invoice.exe.", "invoice.exe ",
// which Windows strips when saving), other trailing whitespace or control
// characters, a NUL byte truncating the name ("invoice.exe\x00.pdf"), and
// directory parts.
func BlockedExtension(filename string) bool {
	_, blocked := blockedExtension(filename)
	return blocked
}

// blockedExtension returns the normalised extension (".exe") and whether it
// is blocked.
func blockedExtension(filename string) (string, bool) {
	ext := extension(filename)
	return ext, sesBlocked[ext]
}

// extension returns the lowercase extension of the name a mail client would
// save filename under, with its dot, or "".
func extension(filename string) string {
	name := filename
	if i := strings.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	name = strings.ReplaceAll(name, `\`, "/")
	name = strings.TrimRightFunc(name, func(r rune) bool {
		return r == '.' || unicode.IsSpace(r) || unicode.IsControl(r)
	})
	name = path.Base(name)
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return ""
	}
	return strings.ToLower(name[i:])
}
