set terminal pngcairo noenhanced size 1780,500 font ',10'
set output 'bench.png'
set multiplot layout 1,5 title 'fraction of the floor (max of FLOPs / cuBLASLt bf16 rate, bytes / copy bandwidth) reached; higher is better'
set logscale x 2
set xlabel 'tokens'
set ylabel 'fraction of floor'
set yrange [0:1.1]
set key bottom right
set grid
set title 'llama3_8b_layer.ffn'
plot 'bench.dat' index 0 using 1:3 with linespoints title 'ffnc', 'bench.dat' index 1 using 1:3 with linespoints title 'eager', 'bench.dat' index 2 using 1:3 with linespoints title 'cublaslt'
set title 'llama3_70b_layer.ffn'
plot 'bench.dat' index 3 using 1:3 with linespoints title 'ffnc', 'bench.dat' index 4 using 1:3 with linespoints title 'eager', 'bench.dat' index 5 using 1:3 with linespoints title 'cublaslt'
set title 'gpt_gelu_4096.ffn'
plot 'bench.dat' index 6 using 1:3 with linespoints title 'ffnc', 'bench.dat' index 7 using 1:3 with linespoints title 'eager', 'bench.dat' index 8 using 1:3 with linespoints title 'cublaslt'
set title 'llama3_8b_4layers.ffn'
plot 'bench.dat' index 9 using 1:3 with linespoints title 'ffnc', 'bench.dat' index 10 using 1:3 with linespoints title 'eager', 'bench.dat' index 11 using 1:3 with linespoints title 'cublaslt'
set title 'llama3_8b_4layers_fused.ffn'
plot 'bench.dat' index 12 using 1:3 with linespoints title 'ffnc', 'bench.dat' index 13 using 1:3 with linespoints title 'eager', 'bench.dat' index 14 using 1:3 with linespoints title 'cublaslt'
unset multiplot
