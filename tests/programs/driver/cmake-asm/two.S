#define VALUE 2
        .text
        .globl two
        .type two, @function
two:
        movl $VALUE, %eax
        ret
        .section .note.GNU-stack,"",@progbits
