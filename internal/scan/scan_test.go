package scan

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// sesList is the SES "unsupported attachment types" list, kept separately
// from the implementation so a typo in either shows up.
const sesList = `.ade .adp .app .asp .bas .bat .cer .chm .cmd .com .cpl .crt .csh .der .exe
.fxp .gadget .hlp .hta .inf .ins .isp .its .js .jse .ksh .lib .lnk .mad .maf .mag .mam .maq
.mar .mas .mat .mau .mav .maw .mda .mdb .mde .mdt .mdw .mdz .msc .msh .msh1 .msh2 .mshxml
.msh1xml .msh2xml .msi .msp .mst .ops .pcd .pif .plg .prf .prg .reg .scf .scr .sct .shb .shs
.sys .ps1 .ps1xml .ps2 .ps2xml .psc1 .psc2 .tmp .url .vb .vbe .vbs .vps .vsmacros .vss .vst
.vsw .vxd .ws .wsc .wsf .wsh .xnk`

func TestEverySESExtensionIsBlocked(t *testing.T) {
	exts := strings.Fields(sesList)
	if len(exts) != 90 || len(sesBlocked) != len(exts) {
		t.Fatalf("list has %d entries, implementation %d; want 90 each (the SES page lists 90)", len(exts), len(sesBlocked))
	}
	s := New("", 0)
	for _, ext := range exts {
		for _, name := range []string{"file" + ext, "FILE" + strings.ToUpper(ext), "report.2024" + ext} {
			if !BlockedExtension(name) {
				t.Errorf("BlockedExtension(%q) = false", name)
			}
		}
		v, err := s.ScanAttachment(context.Background(), "file"+ext, []byte("harmless"))
		if err != nil {
			t.Fatal(err)
		}
		if want := "attachment type " + ext + " is not allowed"; !v.Blocked || v.Reason != want {
			t.Errorf("ScanAttachment(file%s) = %+v, want blocked %q", ext, v, want)
		}
	}
}

func TestSafeExtensionsAllowed(t *testing.T) {
	for _, name := range []string{
		"invoice.pdf", "logo.png", "photo.JPG", "letter.docx", "data.csv", "notes.txt",
		"archive.zip", "invite.ics", "sheet.xlsx", "README", "", ".", "noext.",
		"setup.exe.pdf",   // the last extension counts
		"script.json",     // .js is a prefix, not the extension
		"my.exe.folder/a", // directories do not count
		"report.msh3",     // not on the list
	} {
		if BlockedExtension(name) {
			t.Errorf("BlockedExtension(%q) = true, want false", name)
		}
	}
}

func TestExtensionDisguises(t *testing.T) {
	for _, name := range []string{
		"invoice.EXE", "Invoice.Exe",
		"invoice.exe.", "invoice.exe..", "invoice.exe ", "invoice.exe . .", "invoice.exe\t",
		"invoice.exe\u00a0", // no-break space
		"invoice.exe\r\n",
		"invoice.exe\x00.pdf", // NUL truncation
		`C:\Users\me\invoice.exe`, "../../invoice.exe", "dir/invoice.exe/",
		".exe",
	} {
		if !BlockedExtension(name) {
			t.Errorf("BlockedExtension(%q) = false, want true", name)
		}
	}
}

func TestEICAR(t *testing.T) {
	if len(eicar) != 68 {
		t.Fatalf("EICAR string is %d bytes, want 68", len(eicar))
	}
	s := New("", 0)
	ctx := context.Background()
	want := Verdict{Blocked: true, Reason: "malware detected: Eicar-Signature"}
	for name, content := range map[string][]byte{
		"exact":         eicar,
		"with trailing": append(bytes.Clone(eicar), "\r\n"...),
		"in the middle": append(append([]byte("%PDF-1.7 ..."), eicar...), " trailer"...),
	} {
		v, err := s.ScanAttachment(ctx, "test.pdf", content)
		if err != nil || v != want {
			t.Errorf("attachment %s: %+v, %v; want %+v", name, v, err, want)
		}
	}
	for _, body := range []string{
		"<html><body><p>" + string(eicar) + "</p></body></html>",
		"Hello,\n\n" + string(eicar) + "\n\n-- \nAcme",
	} {
		v, err := s.ScanBody(ctx, []byte(body))
		if err != nil || v != want {
			t.Errorf("body %q: %+v, %v; want %+v", body[:20], v, err, want)
		}
	}
	// A near miss is clean.
	almost := bytes.Clone(eicar)
	almost[len(almost)-1] = '-'
	if v, err := s.ScanBody(ctx, almost); err != nil || v.Blocked {
		t.Errorf("altered EICAR: %+v, %v", v, err)
	}
}

func TestCleanContentPasses(t *testing.T) {
	s := New("", 0)
	ctx := context.Background()
	if v, err := s.ScanAttachment(ctx, "invoice.pdf", []byte("%PDF-1.7 clean")); err != nil || v.Blocked {
		t.Errorf("clean attachment: %+v, %v", v, err)
	}
	if v, err := s.ScanBody(ctx, []byte("<p>Your receipt</p>")); err != nil || v.Blocked {
		t.Errorf("clean body: %+v, %v", v, err)
	}
	if v, err := s.ScanBody(ctx, nil); err != nil || v.Blocked {
		t.Errorf("empty body: %+v, %v", v, err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping without clamd: %v", err)
	}
}

func TestBlockedExtensionWinsOverContent(t *testing.T) {
	v, err := New("", 0).ScanAttachment(context.Background(), "run.bat", eicar)
	if err != nil || v.Reason != "attachment type .bat is not allowed" {
		t.Fatalf("%+v, %v", v, err)
	}
}
