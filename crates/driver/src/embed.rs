//! The registration code of a fat binary, as assembly: the linked device images in a
//! `.llvm.offloading` section, a `__tgt_bin_desc` pointing at them and at the host entry table,
//! and a priority-101 constructor that registers it (unregistering at exit).

use crate::bundle::EntryLayout;
use std::fmt::Write;
use std::path::PathBuf;

/// One OffloadBinary file to embed, and where its payload (the device library) lies in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Embedded {
    pub blob: PathBuf,
    pub payload_offset: u64,
    pub payload_size: u64,
}

/// Assembly (x86-64, GNU syntax) registering `images` with libomptarget.
pub fn registration_asm(images: &[Embedded], layout: EntryLayout) -> String {
    let sec = layout.section();
    let align = match layout {
        EntryLayout::Legacy => 0,
        EntryLayout::New => 3,
    };
    let mut s = String::from("# ompcc: offload registration (generated)\n");
    let _ = writeln!(s, "\t.section\t{sec},\"aw\",@progbits\n\t.p2align\t{align}");
    let _ = writeln!(s, "\t.hidden\t__start_{sec}\n\t.hidden\t__stop_{sec}");
    s.push_str("\t.section\t.llvm.offloading,\"a\",@llvm_offloading\n");
    for (i, img) in images.iter().enumerate() {
        let path = img.blob.to_string_lossy().replace('\\', "\\\\").replace('"', "\\\"");
        let _ = writeln!(s, "\t.p2align\t3\n.Lompcc_image{i}:\n\t.incbin\t\"{path}\"");
    }
    s.push_str("\t.section\t.data.rel.ro.ompcc_offloading,\"aw\",@progbits\n\t.p2align\t3\n");
    s.push_str(".Lompcc_device_images:\n");
    for (i, img) in images.iter().enumerate() {
        let (b, e) = (img.payload_offset, img.payload_offset + img.payload_size);
        let _ = writeln!(s, "\t.quad\t.Lompcc_image{i}+{b}\n\t.quad\t.Lompcc_image{i}+{e}");
        let _ = writeln!(s, "\t.quad\t__start_{sec}\n\t.quad\t__stop_{sec}");
    }
    let _ = writeln!(s, ".Lompcc_descriptor:\n\t.long\t{}\n\t.zero\t4", images.len());
    s.push_str("\t.quad\t.Lompcc_device_images\n");
    let _ = writeln!(s, "\t.quad\t__start_{sec}\n\t.quad\t__stop_{sec}");
    s.push_str(concat!(
        "\t.section\t.text.startup,\"ax\",@progbits\n",
        "\t.p2align\t4\n",
        "\t.type\tompcc.offloading.register,@function\n",
        "ompcc.offloading.register:\n",
        "\tpushq\t%rax\n",
        "\tleaq\t.Lompcc_descriptor(%rip), %rdi\n",
        "\tcallq\t__tgt_register_lib@PLT\n",
        "\tleaq\tompcc.offloading.unregister(%rip), %rdi\n",
        "\tpopq\t%rax\n",
        "\tjmp\tatexit@PLT\n",
        "\t.size\tompcc.offloading.register, .-ompcc.offloading.register\n",
        "\t.p2align\t4\n",
        "\t.type\tompcc.offloading.unregister,@function\n",
        "ompcc.offloading.unregister:\n",
        "\tleaq\t.Lompcc_descriptor(%rip), %rdi\n",
        "\tjmp\t__tgt_unregister_lib@PLT\n",
        "\t.size\tompcc.offloading.unregister, .-ompcc.offloading.unregister\n",
        "\t.section\t.init_array.101,\"aw\",@init_array\n",
        "\t.p2align\t3\n",
        "\t.quad\tompcc.offloading.register\n",
        "\t.section\t.note.GNU-stack,\"\",@progbits\n",
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_points_at_payload_and_table() {
        let img = Embedded { blob: PathBuf::from("/t/x.bin"), payload_offset: 144, payload_size: 1000 };
        let asm = registration_asm(&[img], EntryLayout::New);
        assert!(asm.contains(".incbin\t\"/t/x.bin\""));
        assert!(asm.contains(".quad\t.Lompcc_image0+144\n\t.quad\t.Lompcc_image0+1144"));
        assert!(asm.contains("__start_llvm_offload_entries"));
        assert!(asm.contains(".init_array.101"));
        assert!(asm.contains("\t.long\t1\n"));
        let legacy = registration_asm(&[], EntryLayout::Legacy);
        assert!(legacy.contains("__stop_omp_offloading_entries"));
    }
}
